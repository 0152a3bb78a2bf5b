"""`cw list` and `cw status` take a run's state from its trainer's owner: its evaluation and export
Jobs carry the run's labels too (so that `cw logs RUN --role eval` finds them), and before this a
side Job listed after the trainer set the run's state."""

from __future__ import annotations

import pytest

from cw_cli.k8s.run_view import collect_runs


def _job(name: str, component: str, status: dict) -> dict:
    labels = {"cw-cli.dev/run": "r", "app.kubernetes.io/component": component}
    return {"kind": "Job", "metadata": {"name": name, "namespace": "ns", "labels": labels},
            "spec": {"template": {"spec": {"containers": [{"name": component}]}}}, "status": status}  # fmt: skip


RUNNING = {"active": 1, "ready": 1}
SUCCEEDED = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
FAILED = {"failed": 1, "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}


@pytest.mark.parametrize("side", ["eval", "export"])
@pytest.mark.parametrize("trainer_first", [True, False])
def test_a_running_trainer_is_running_whatever_its_side_jobs_did(side, trainer_first):
    trainer = ("Job", _job("r-trainer", "trainer", RUNNING))
    others = [("Job", _job(f"r-{side}-10", side, SUCCEEDED)), ("Job", _job(f"r-{side}-20", side, FAILED))]
    objects = [trainer, *others] if trainer_first else [*others, trainer]
    views, owners = collect_runs(objects, "ns")
    assert views[("ns", "r")].state == "Running"
    assert [obj["metadata"]["name"] for _, obj in owners[("ns", "r")]] == ["r-trainer"]  # failures explained: the trainer's


def test_a_run_whose_trainer_is_gone_is_seen_through_what_is_left():
    views, _ = collect_runs([("Job", _job("r-export-40", "export", SUCCEEDED))], "ns")
    assert views[("ns", "r")].state == "Succeeded"
