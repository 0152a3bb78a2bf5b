"""`cw status` says why a trainer was restarted: after a stall (exit 75: no step since when, after
which step, where the stacks are) or a warned stop (exit 143: the checkpoint it saved), from the
pods the cluster keeps and the lines cw_fault.py's supervisor really prints."""

from __future__ import annotations

import sys
import textwrap

import pytest

from cw_cli.diagnosis.diagnose import diagnose, explain_pod, log_requests
from cw_cli.diagnosis.logs import restart_cause
from cw_cli.k8s.run_view import RunView, explain_run, live_pods
from cw_cli.runtime import cw_fault

# A "rank" that steps three times, then hangs; its stacks go where the supervisor asks (as activate() does).
_HANGING_RANK = textwrap.dedent("""
    import faulthandler, json, os, pathlib, signal, time
    folder = pathlib.Path(os.environ["CW_FT_DIR"])
    (folder / "stacks").mkdir(exist_ok=True)
    (folder / "ranks").mkdir(exist_ok=True)
    stacks = open(folder / "stacks" / "rank-0.txt", "w")
    faulthandler.register(signal.SIGUSR2, file=stacks, all_threads=True)
    for step in (1, 2, 3):
        beat = {"rank": 0, "pid": os.getpid(), "step": step, "beats": step, "time": time.time(), "done": False}
        (folder / "ranks" / "rank-0.json").write_text(json.dumps(beat))
        time.sleep(0.3)
    time.sleep(60)
""")
# A command whose ranks stopped early with a complete checkpoint (what the callback leaves behind).
_STOPPED_RANK = textwrap.dedent("""
    import json, os, pathlib, time
    record = {"step": 40, "checkpoint": "/checkpoints/r/checkpoint-40", "time": time.time()}
    (pathlib.Path(os.environ["CW_FT_DIR"]) / "stopped.json").write_text(json.dumps(record))
""")


def _supervised(command: str, tmp_path, capfd, monkeypatch) -> tuple[int, list[str]]:
    """The pod's exit code and its log, as cw_fault's supervisor produces them."""
    monkeypatch.setenv(cw_fault.STALL_TIMEOUT_ENV, "1")
    code = cw_fault.supervise([sys.executable, "-c", command], tmp_path / "run", poll_s=0.1)
    return code, capfd.readouterr().err.splitlines()


def _trainer_pod(name: str, code: int | None, created: str = "2026-11-27T13:00:00Z") -> dict:
    state = {"running": {"startedAt": created}} if code is None else {"terminated": {"exitCode": code, "reason": "Error"}}
    return {
        "metadata": {"name": name, "namespace": "ml", "creationTimestamp": created,
                     "labels": {"app.kubernetes.io/component": "trainer", "cw-cli.dev/run": "r"}},
        "spec": {"containers": [{"name": "trainer", "image": "img"}]},
        "status": {"phase": "Running" if code is None else "Failed",
                   "containerStatuses": [{"name": "trainer", "ready": code is None, "restartCount": 0, "state": state}]},
    }  # fmt: skip


def test_a_stalled_pod_is_explained_with_the_time_the_step_and_the_stacks(tmp_path, capfd, monkeypatch):
    code, log = _supervised(_HANGING_RANK, tmp_path, capfd, monkeypatch)
    assert code == cw_fault.STALL_EXIT == 75
    cause = restart_cause(["{'loss': 1.2}", *log])
    assert cause is not None and cause.kind == "stalled" and cause.step == 3
    stacks = next((tmp_path / "run" / ".cw").glob("stacks-*"))
    assert cause.stacks == str(stacks) and cause.since and cause.since.endswith("Z")
    pod = _trainer_pod("r-trainer-0-a", code)
    assert ("trainer", False) in log_requests(pod)
    [explanation] = explain_pod(pod, {"trainer": log})
    assert explanation.kind == "stall" and explanation.summary == "restarted after a stall"
    assert explanation.message.startswith(f"restarted after a stall: no step since {cause.since} after step 3; stacks in {stacks}")
    assert any("stalled since" in line for line in explanation.log)


def test_a_warned_stop_is_explained_with_its_checkpoint(tmp_path, capfd, monkeypatch):
    code, log = _supervised(_STOPPED_RANK, tmp_path, capfd, monkeypatch)
    assert code == cw_fault.STOPPED_EXIT == 143
    [explanation] = explain_pod(_trainer_pod("r-trainer-0-a", code), {"trainer": log})
    assert explanation.kind == "warned-stop"
    assert "restarted after a warned stop (checkpoint at step 40: /checkpoints/r/checkpoint-40)" in explanation.message


def test_the_stop_line_with_its_timing_is_read_too():
    line = ("[cw-launch] stopped at step 12 with a complete checkpoint /checkpoints/r/checkpoint-12 (complete 3.1 s "
            "after the signal, the command ended after 4.0 s); a relaunch resumes from it")  # fmt: skip
    cause = restart_cause([line])
    assert cause is not None and (cause.kind, cause.step, cause.checkpoint) == ("stopped", 12, "/checkpoints/r/checkpoint-12")


def test_the_latest_of_a_stall_and_a_stop_counts_and_other_logs_tell_nothing():
    stall = "[cw-launch] stalled since 2026-11-27T13:38:11Z (no step for 5.0 s after step 6); stacks in /c/r/.cw/s; restarting from the last checkpoint"
    stop = "[cw-launch] stopped at step 8 with a complete checkpoint /c/r/checkpoint-8; a relaunch resumes from it"
    assert restart_cause([stall, stop]).kind == "stopped"  # type: ignore[union-attr]
    assert restart_cause([stop, stall]).kind == "stalled"  # type: ignore[union-attr]
    assert restart_cause(["Traceback (most recent call last):", "ValueError: no"]) is None


def test_a_stall_without_its_log_is_still_named_and_a_bare_sigterm_is_only_an_exit_code():
    [stall] = explain_pod(_trainer_pod("r-trainer-0-a", 75))
    assert stall.kind == "stall" and "stacks-" in stall.message
    [sigterm] = explain_pod(_trainer_pod("r-trainer-0-a", 143), {"trainer": ["Killed"]})
    assert sigterm.kind == "exit-code" and "SIGTERM" in sigterm.message


@pytest.mark.parametrize("code", [75, 143])
def test_a_running_run_shows_why_it_last_restarted_without_calling_it_a_failure(code):
    stall = "[cw-launch] stalled since 2026-11-27T13:38:11Z (no step for 5.0 s after step 6); stacks in /c/r/.cw/s; restarting from the last checkpoint"
    stop = "[cw-launch] stopped at step 8 with a complete checkpoint /c/r/checkpoint-8; a relaunch resumes from it"
    old = _trainer_pod("r-trainer-0-old", 1, "2026-11-27T12:00:00Z")  # an attempt retried long ago: not shown
    restarted = _trainer_pod("r-trainer-0-b", code, "2026-11-27T13:00:00Z")
    running = _trainer_pod("r-trainer-0-c", None, "2026-11-27T13:40:00Z")
    view = RunView(name="r", namespace="ml", state="Running")
    shown, _ = live_pods(view, [old, restarted, running])
    assert [p["metadata"]["name"] for p in shown] == ["r-trainer-0-b", "r-trainer-0-c"]
    explain_run(view, [], [old, restarted, running], {("ml", "r-trainer-0-b", "trainer"): [stall if code == 75 else stop]})
    [explanation] = view.explanations
    assert explanation.pod == "r-trainer-0-b" and view.failure is None
    expected = "no step since 2026-11-27T13:38:11Z after step 6; stacks in /c/r/.cw/s" if code == 75 else "checkpoint at step 8"
    assert expected in explanation.message


def test_a_failed_run_puts_the_stall_before_the_backoff_limit():
    stall = "[cw-launch] stalled since 2026-11-27T13:38:11Z (no step for 5.0 s after step 6); stacks in /c/r/.cw/s; restarting from the last checkpoint"
    job = {"metadata": {"name": "r-trainer"}, "spec": {"backoffLimit": 0},
           "status": {"failed": 1, "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                                                   "message": "Job has reached the specified backoff limit"}]}}  # fmt: skip
    found = diagnose([("Job", job)], [_trainer_pod("r-trainer-0-a", 75)], {("r-trainer-0-a", "trainer"): [stall]})
    assert found[0].kind == "stall" and found[-1].kind == "backoff-limit"
